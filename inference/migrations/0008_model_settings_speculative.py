from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("inference", "0007_model_settings_kv")]

    operations = [
        migrations.AddField(
            "modelsettings", "speculative", models.CharField(blank=True, max_length=16, null=True)
        ),
        migrations.AddField(
            "modelsettings", "num_draft_tokens", models.PositiveIntegerField(blank=True, null=True)
        ),
    ]
