from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("inference", "0008_model_settings_speculative")]

    operations = [
        migrations.AddField(
            "modelsettings", "draft_model", models.CharField(blank=True, max_length=255, null=True)
        ),
    ]
