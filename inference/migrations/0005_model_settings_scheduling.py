from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("inference", "0004_model_settings_priority")]

    operations = [
        migrations.AddField("modelsettings", "max_batch_wait_ms", models.FloatField(blank=True, null=True)),
        migrations.AddField("modelsettings", "max_step_ms", models.FloatField(blank=True, null=True)),
    ]
